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


class CompactRows(eqx.Module):
    """A batch's candidate embeddings stored once per distinct row, for fitting the
    query adapter without touching a (Q, C, D) array at every step.

    ``cos(q + L R^T q, c) = (c^ . q + (c^ L) . (R^T q)) / |q + L R^T q|`` with ``c^``
    the unit row, so a step needs the (M, R) product ``bank @ L`` and a (Q, M)
    product with the queries' (Q, R) projections instead of a pass over every
    candidate's D floats.

    Attributes:
        bank: (M, D) distinct candidate rows, scaled to unit norm (zero rows for a
            zero-norm or non-finite row).
        index: (Q, C) the bank row of each candidate (padding: any row).
        dots: (Q, C) each unit row's dot product with the raw query (0 for a
            non-finite query).
        query_ok: (Q,) the query embedding is finite.
    """

    bank: Any
    index: Any
    dots: Any
    query_ok: Any


def compact_rows(batch: RecallBatch) -> CompactRows:
    """The :class:`CompactRows` of a batch built with its embeddings (host numpy).

    Args:
        batch: a recall batch with (Q, C, D) candidate embeddings.

    Returns:
        The compact rows (float64).

    Raises:
        ValueError: the batch has no embeddings.
    """
    rows = np.asarray(batch.columns.embedding, np.float64)
    if rows.shape[-1] == 0:
        raise ValueError(
            "the adapter needs the batch's embeddings: build_recall_batch(..., "
            "embeddings=True)"
        )
    q, c, d = rows.shape
    flat = np.ascontiguousarray(rows.reshape(q * c, d))
    _, first, inverse = np.unique(flat.view(np.dtype((np.void, 8 * d))).ravel(),
                                  return_index=True, return_inverse=True)
    bank = flat[first]
    finite = np.all(np.isfinite(bank), axis=-1)
    bank = np.where(finite[:, None], bank, 0.0)
    norm = np.sqrt(np.sum(bank * bank, axis=-1))
    bank = np.where(norm[:, None] > 0, bank / np.where(norm > 0, norm, 1.0)[:, None], 0.0)
    query = np.asarray(batch.query.embedding, np.float64)
    query_ok = np.all(np.isfinite(query), axis=-1)
    query = np.where(query_ok[:, None], query, 0.0)
    index = inverse.reshape(q, c).astype(np.int32)
    dots = np.einsum("qcd,qd->qc", bank[index], query)
    return CompactRows(bank=bank, index=index, dots=dots, query_ok=query_ok)


def adapted_semantic(adapter: QueryAdapter, query: Any, compact: CompactRows) -> jax.Array:
    """s1 of every candidate under the adapter, from :class:`CompactRows`.

    Equal (up to rounding) to ``vmap(bank_cosine)(adapt_query(adapter, query), rows)``.

    Args:
        adapter: the (D, R) factors.
        query: (Q, D) raw query embeddings.
        compact: the batch's compact rows.

    Returns:
        (Q, C) cosines (0 for a zero or non-finite query or row).
    """
    ok = compact.query_ok
    q = jnp.where(ok[:, None], query, 0.0)
    inner = q @ adapter.right  # (Q, R)
    adapted = q + inner @ adapter.left.T  # (Q, D)
    # (Q, M) low-rank products, then each query's candidates: the gradient scatters Q*C
    # scalars, where gathering (Q, C, R) rows would scatter Q*C*R
    every = inner @ (compact.bank @ adapter.left).T
    numerator = compact.dots + jnp.take_along_axis(every, compact.index, axis=1)
    sq = jnp.sum(adapted * adapted, axis=-1)
    good = ok & (sq > 0)
    norm = jnp.sqrt(jnp.where(good, sq, 1.0))
    return jnp.where(good[:, None], numerator / norm[:, None], 0.0)


def batch_scores(
    params: ScoringParams, batch: RecallBatch, signal_mask: Any = None,
    adapter: QueryAdapter | None = None, compact: CompactRows | None = None,
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
        compact: with an adapter, the batch's :class:`CompactRows`: s1 is then
            computed from them (:func:`adapted_semantic`; the batch's (Q, C, D) rows
            are not read and may be empty).

    Returns:
        (Q, C) totals; padding candidates get a very negative score.
    """
    semantic = batch.semantic
    if adapter is not None and compact is not None:
        semantic = adapted_semantic(adapter, batch.query.embedding, compact)
    elif adapter is not None:
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

    Raises:
        ValueError, TypeError: a batch field of the wrong shape or dtype, named
            (:func:`checked_shapes`); a config that routes its base weights
            (:func:`unrouted`).
    """
    cfg = config or EmotionalMemoryConfig()
    unrouted(cfg)
    checked_shapes(batch)
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


def unrouted(config: EmotionalMemoryConfig) -> EmotionalMemoryConfig:
    """``config``, checked not to route its base weights per query type.

    The batch forward (and so every fit) scores with ``retrieval.base_weights``; the
    engine replaces them by the routed vector of the query's type, so a fit would
    tune weights the engine never uses, and batch metrics would not be the engine's.

    Args:
        config: the configuration a batch is scored or fitted under.

    Returns:
        ``config``.

    Raises:
        ValueError: ``retrieval.query_classifier`` routes (a mode other than
            ``"disabled"`` with routed weights).
    """
    qc = config.retrieval.query_classifier
    if qc is not None and qc.mode != "disabled" and qc.routed_weights:
        raise ValueError(
            f"retrieval.query_classifier routes the base weights per query type (mode "
            f"{qc.mode!r}), which batch scoring and fitting do not model: the fitted "
            f"base_weights would not be the ones the engine uses; set "
            f"retrieval.query_classifier to None (or mode 'disabled') to fit or score"
        )
    return config


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


def scored_groups(
    groups: Iterable[str], batch: RecallBatch, config: EmotionalMemoryConfig
) -> None:
    """Check that the batch scores the signal of every ``lexical`` / ``context`` group.

    A group whose signal is not scored has a gradient of exactly 0: a fit would return
    its starting values as fitted.

    Args:
        groups: the trainable groups of a fit.
        batch: the batch it trains on (after :func:`batch_for`).
        config: the starting configuration (its ``enable_lexical`` switch).

    Raises:
        ValueError: ``lexical`` or ``context`` on a batch without lexical statistics,
            ``context`` on one without neighbours, or ``lexical`` with
            ``enable_lexical`` off.
    """
    groups = tuple(groups)
    if "lexical" in groups and not config.enable_lexical:
        raise ValueError("the lexical group is not scored with enable_lexical=False "
                         "(s7 switched off): switch it on or leave the group out")
    for group in ("lexical", "context"):
        if group in groups and batch.lexical is None:
            extra = ", context=True" if group == "context" else ""
            raise ValueError(f"the {group} group needs the batch's lexical statistics: "
                             f"build_recall_batch(..., lexical=True{extra})")
    if "context" in groups and batch.context is None:
        raise ValueError("the context group needs the batch's neighbours: "
                         "build_recall_batch(..., lexical=True, context=True)")


_CANDIDATE_FIELDS = ("affect", "mood", "velocity", "age_seconds", "consolidation",
                     "retrieval_count", "activation")
_QUERY_FIELDS = ("affect", "mood", "velocity")
_LEXICAL_ROWS = ("tf", "length")
_LEXICAL_QUERY = ("df", "n_docs", "avg_length")


def _dtype(name: str, x: Any, kind: str, what: str) -> None:
    if np.asarray(x).dtype.kind not in kind:
        raise TypeError(f"batch.{name} must hold {what}, got dtype {np.asarray(x).dtype}")


def checked_shapes(batch: RecallBatch) -> None:
    """Check that every leaf of ``batch`` has the shape and dtype the scorer expects.

    (Q, C) come from ``batch.labels``; a field of another shape would fail deep
    inside JAX (a broadcasting error) or numpy.

    Raises:
        TypeError: ``labels`` / ``columns.valid`` not bool, ``scenario`` /
            ``challenge`` / ``context.neighbours`` not integers.
        ValueError: naming the first field whose shape does not fit (Q, C).
    """
    _dtype("labels", batch.labels, "b", "bools")
    _dtype("columns.valid", batch.columns.valid, "b", "bools")
    for name in ("scenario", "challenge"):
        _dtype(name, getattr(batch, name), "iu", "integers")
    if np.ndim(batch.labels) != 2:
        raise ValueError(f"batch.labels must be (Q, C), got shape {np.shape(batch.labels)}")
    q, c = np.shape(batch.labels)
    cols, query, lex = batch.columns, batch.query, batch.lexical
    t = np.shape(lex.df)[-1] if lex is not None and np.ndim(lex.df) == 2 else None
    rows = np.shape(cols.embedding)[-1] if np.ndim(cols.embedding) == 3 else None
    expected: dict[str, tuple[Any, tuple[int | None, ...]]] = {
        "semantic": (batch.semantic, (q, c)), "scenario": (batch.scenario, (q,)),
        "challenge": (batch.challenge, (q,)),
        **{f"columns.{n}": (getattr(cols, n), (q, c, 3)) for n in ("affect", "mood",
                                                                    "velocity")},
        **{f"columns.{n}": (getattr(cols, n), (q, c)) for n in (
            "age_seconds", "consolidation", "retrieval_count", "activation", "valid")},
        "columns.embedding": (cols.embedding, (q, c, None)),
        **{f"query.{n}": (getattr(query, n), (q, 3)) for n in ("affect", "mood", "velocity")},
        # the candidates' rows may be dropped (D = 0) while the queries keep theirs
        "query.embedding": (query.embedding, (q, rows if rows else None)),
    }
    if lex is not None:
        expected.update({
            "lexical.tf": (lex.tf, (q, c, t)), "lexical.length": (lex.length, (q, c)),
            "lexical.df": (lex.df, (q, None)), "lexical.n_docs": (lex.n_docs, (q,)),
            "lexical.avg_length": (lex.avg_length, (q,)),
        })
    if batch.context is not None:
        _dtype("context.neighbours", batch.context.neighbours, "iu", "integers")
        expected["context.neighbours"] = (batch.context.neighbours, (q, c, None))
    for name, (x, want) in expected.items():
        got = np.shape(x)
        if len(got) != len(want) or any(w is not None and g != w
                                        for g, w in zip(got, want, strict=True)):
            shown = tuple("*" if w is None else w for w in want)
            raise ValueError(f"batch.{name} has shape {got}, expected {shown} "
                             f"(Q, C = {q}, {c} from batch.labels)")


def _first_bad(name: str, values: np.ndarray, rows: np.ndarray, info: Any = None) -> None:
    """Raise ``ValueError`` naming ``name`` when ``values`` is not finite on ``rows``."""
    bad = ~np.isfinite(values)
    bad = bad.any(axis=tuple(range(rows.ndim, bad.ndim))) & rows
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        at = f"query {where[0]}" + (f", candidate {where[1]}" if len(where) > 1 else "")
        raise ValueError(
            f"batch.{name} holds a NaN or infinite value ({at}): the scores would be "
            f"NaN and nothing could be fitted; repair or drop that query"
        )


def checked_inputs(batch: RecallBatch) -> RecallBatch:
    """``batch`` checked to hold finite numbers wherever they are scored.

    Every input of a real candidate (``semantic`` and the candidate columns) and of
    every query (affect, mood, velocity; the lexical statistics) must be finite:
    a NaN there makes the loss NaN from the first step. Embeddings are exempt (a
    NaN or zero-norm embedding has cosine 0). A non-finite value on a padding row of
    ``semantic`` or the candidate columns is replaced by 0 (it is never scored, but
    would make the gradient NaN); the lexical statistics must be finite everywhere.

    Args:
        batch: the recall batch.

    Returns:
        The batch, padding rows made finite (the same object when nothing changed).

    Raises:
        ValueError: naming the field and the first query (and candidate) holding a
            NaN or infinite value.
    """
    valid = np.asarray(batch.columns.valid, bool)
    every = np.ones(valid.shape[:1], bool)
    _first_bad("semantic", np.asarray(batch.semantic), valid)
    for name in _CANDIDATE_FIELDS:
        _first_bad(f"columns.{name}", np.asarray(getattr(batch.columns, name)), valid)
    for name in _QUERY_FIELDS:
        _first_bad(f"query.{name}", np.asarray(getattr(batch.query, name)), every)
    if batch.lexical is not None:
        for name in _LEXICAL_ROWS:
            # padding rows too: the term statistics are zero-filled there
            _first_bad(f"lexical.{name}", np.asarray(getattr(batch.lexical, name)),
                       np.ones_like(valid))
        for name in _LEXICAL_QUERY:
            _first_bad(f"lexical.{name}", np.asarray(getattr(batch.lexical, name)), every)

    def padded(x: Any) -> Any:
        x = np.asarray(x)
        pad = ~valid.reshape(valid.shape + (1,) * (x.ndim - 2))
        return np.where(pad & ~np.isfinite(x), 0.0, x)

    leaves = [batch.semantic, *(getattr(batch.columns, n) for n in _CANDIDATE_FIELDS)]
    if all(np.isfinite(np.asarray(x)).all() for x in leaves):
        return batch
    columns = dataclasses.replace(batch.columns, **{
        n: padded(getattr(batch.columns, n)) for n in _CANDIDATE_FIELDS
    })
    return dataclasses.replace(batch, columns=columns, semantic=padded(batch.semantic))


def listwise_loss(totals: Any, labels: Any, valid: Any, temperature: Any) -> jax.Array:
    """Per-query ``-log(sum of softmax(totals / T) over the positives)``.

    Args:
        totals: (Q, C) scores.
        labels: (Q, C) positives.
        valid: (Q, C) real candidates.
        temperature: softmax temperature (> 0).

    Returns:
        (Q,) losses (0 for queries without a positive candidate).

    Raises:
        TypeError: ``labels`` or ``valid`` is not a bool array (``&`` would read a
            graded label 2 as irrelevant).
    """
    for name, x in (("labels", labels), ("valid", valid)):
        if jnp.result_type(x) != jnp.bool_:
            raise TypeError(f"{name} must be a bool array, got dtype {jnp.result_type(x)}")
    z = jnp.where(valid, totals / temperature, _NEG)
    pos = labels & valid
    has_pos = jnp.any(pos, axis=-1)
    lse_all = jax.nn.logsumexp(z, axis=-1)
    lse_pos = jax.nn.logsumexp(jnp.where(pos, z, _NEG), axis=-1)
    return jnp.where(has_pos, lse_all - lse_pos, 0.0)
