"""Read-only batch retrieval: many queries against the whole store in one program.

:class:`BatchRetriever` (and :func:`score_queries`) embeds all queries in one
``embed_batch``, takes the store's columns as one bank and returns each query's top-k
``(memory, score)`` pairs from :func:`~emotional_memory.kernel.chunked_topk.score_batch`.
Unlike :meth:`EmotionalMemory.retrieve` it computes the pass-1 score only
(docs/behaviour.md §4, in float32), scores every memory (no prefilter), runs no
spreading activation (resonance 0) and writes nothing (no side effects, no state
change). With the lexical signal s7 on (and with the context signal s8, which brings
s7), every query is scored in float64 with s7 (and s8) over the whole bank, one store
read per query. See ``docs/scale.md``, "Read-only batch API".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from emotional_memory._bank import LexicalQuery, query_features
from emotional_memory._context import neighbour_rows, view_neighbours
from emotional_memory._engine.config import adapt_embedding
from emotional_memory._precision import float64
from emotional_memory._validation import positive_int
from emotional_memory.affect import CoreAffect
from emotional_memory.kernel.chunked_topk import DEFAULT_CHUNK_SIZE, score_batch
from emotional_memory.kernel.columns import MemoryColumns, QueryFeatures, bucket_size
from emotional_memory.kernel.context import ContextInputs
from emotional_memory.kernel.plan import top_k_bucket
from emotional_memory.kernel.score import score_bank
from emotional_memory.lexical import query_terms
from emotional_memory.models import Memory
from emotional_memory.retrieval import pad_lexical
from emotional_memory.scoring_config import params_from_config

if TYPE_CHECKING:
    from emotional_memory.engine import EmotionalMemory

__all__ = ["BatchRetriever", "score_queries"]


class BatchRetriever:
    """Score batches of queries against an engine's whole store, without side effects.

    Args:
        engine: the :class:`~emotional_memory.engine.EmotionalMemory` to read from
            (its store, embedder, clock, state and configuration).
        chunk_size: memories scored per step of the compiled scan (bounds memory to
            about ``queries * chunk_size`` floats).

    Raises:
        TypeError: ``engine`` is no :class:`~emotional_memory.engine.EmotionalMemory`.
        TypeError / ValueError: ``chunk_size`` is no int >= 1.
    """

    def __init__(self, engine: EmotionalMemory, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        from emotional_memory.engine import EmotionalMemory  # the engine imports much

        if not isinstance(engine, EmotionalMemory):
            raise TypeError(f"engine must be an EmotionalMemory, got {type(engine).__name__}")
        self.engine = engine
        self.chunk_size = positive_int("chunk_size", chunk_size)

    def __call__(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        *,
        query_affects: Sequence[CoreAffect | None] | None = None,
    ) -> list[list[tuple[Memory, float]]]:
        """Alias of :meth:`score`."""
        return self.score(queries, top_k, query_affects=query_affects)

    def score(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        *,
        query_affects: Sequence[CoreAffect | None] | None = None,
    ) -> list[list[tuple[Memory, float]]]:
        """The ``top_k`` memories of every query by pass-1 score.

        Args:
            queries: query texts.
            top_k: memories per query (>= 1; numpy integers accepted). It is
                compiled rounded up to a power of two (at least 8) and capped by the
                bank's padded size: a handful of programs serve every ``top_k``.
            query_affects: optional per-query affect for affect proximity (s3); None
                (or a None entry) uses the engine's current core affect.

        Returns:
            One list per query of ``(memory, score)`` pairs, best first (ties: the
            earlier-inserted memory first); shorter than ``top_k`` when the store
            holds fewer memories.

        Raises:
            TypeError / ValueError: on a bad query, ``top_k`` or ``query_affects``, or a
                query embedding whose dimension differs from the store's.
        """
        engine = self.engine
        texts = _check_queries(engine, queries)
        top_k = positive_int("top_k", top_k)
        affects = _check_affects(query_affects, len(texts))
        if not texts:
            return []
        if len(engine.store) == 0:
            return [[] for _ in texts]

        now = engine._now()
        state = engine.get_state()
        raw = _embed_all(engine.embedder, texts)
        embeddings = [
            engine._clean_embedding(e, f"queries[{i}]") for i, e in enumerate(raw)
        ]

        row_ids, bank, store_dim = _bank(engine, now)
        dim = int(bank.embedding.shape[1])
        # No more results than rows; the compiled k is a power-of-two bucket (a prefix
        # of a top-k is the smaller top-k, ties included), so few programs serve all.
        width = min(top_k, bank.size)
        k_run = min(top_k_bucket(width), bank.size)
        n_queries = len(texts)
        q_emb = np.zeros((n_queries, dim), dtype=np.float32)
        adapter = engine._derived().adapter
        for i, emb in enumerate(embeddings):
            if not emb or store_dim is None:  # semantic similarity 0 (docs/behaviour.md §4, s1)
                continue
            if len(emb) != store_dim:
                raise ValueError(
                    f"queries[{i}] embedding has length {len(emb)}, the store holds "
                    f"dimension {store_dim}"
                )
            # the adapted query (retrieval.query_adapter) is what the bank is scored by
            q_emb[i] = _unit_float32(adapt_embedding(adapter, np.asarray(emb, np.float64)))
        q_affect = np.asarray(
            [(a if a is not None else state.core_affect).as_tuple() for a in affects],
            np.float32,
        ).reshape(n_queries, 3)

        if engine._derived().context_on or engine._derived().lexical_on:
            adapted = [
                adapt_embedding(adapter, np.asarray(e, np.float64)) if e else None
                for e in embeddings
            ]
            chosen = [a if a is not None else state.core_affect for a in affects]
            index, scores, ids = _score_with_context(engine, texts, adapted, chosen, width, now)
            return _results(engine, index, scores, ids)
        mask = np.asarray(engine.config.signal_mask(), dtype=np.float32)
        signal_mask = None if bool(np.all(mask == 1.0)) else mask
        cfg = engine.config
        # Query routing may give queries different base weights: one call per route.
        routes: dict[tuple[float, ...], list[int]] = {}
        for i, text in enumerate(texts):
            routes.setdefault(tuple(engine._route(text)), []).append(i)
        index = np.full((n_queries, width), -1, dtype=np.int64)
        scores = np.full((n_queries, width), -np.inf, dtype=np.float64)
        for base, members in routes.items():
            params = params_from_config(
                cfg.retrieval, cfg.decay, base_weights=list(base), dtype=np.float32
            )
            # only this route's queries, padded to a power of two: fewer compiled shapes
            features = _route_queries(q_emb[members], q_affect[members], state)
            idx, sc = score_batch(
                params, features, bank, k_run,
                chunk_size=self.chunk_size, signal_mask=signal_mask,
            )
            count = len(members)
            index[members] = np.asarray(idx)[:count, :width]
            scores[members] = np.asarray(sc)[:count, :width]

        return _results(engine, index, scores, row_ids)


def _route_queries(embedding: np.ndarray, affect: np.ndarray, state: Any) -> QueryFeatures:
    """One route's queries as :class:`QueryFeatures`, the query axis zero-padded to a
    power of two; every query shares the engine's mood and momentum.

    Args:
        embedding: (M, D) float32 unit query embeddings (zero: none).
        affect: (M, 3) float32 query affects.
        state: the engine state (mood, momentum).

    Returns:
        The features, (bucket_size(M), ...) leaves.
    """
    padded = bucket_size(len(embedding), minimum=1)

    def pad(rows: np.ndarray) -> np.ndarray:
        out = np.zeros((padded, rows.shape[1]), np.float32)
        out[: len(rows)] = rows
        return out

    return QueryFeatures(
        embedding=pad(embedding),
        affect=pad(affect),
        # as retrieve: the mood as last updated (docs/behaviour.md §11)
        mood=np.tile(np.asarray(state.mood.as_tuple(), np.float32), (padded, 1)),
        velocity=np.tile(np.asarray(state.momentum.velocity(), np.float32), (padded, 1)),
    )


def _results(
    engine: EmotionalMemory, index: np.ndarray, scores: np.ndarray,
    row_ids: Sequence[str | None],
) -> list[list[tuple[Memory, float]]]:
    """Per query, the ``(memory, score)`` pairs of its top rows (-1: none)."""
    store = engine.store
    results: list[list[tuple[Memory, float]]] = []
    for i in range(index.shape[0]):
        found: list[tuple[Memory, float]] = []
        for row, score in zip(index[i].tolist(), scores[i].tolist(), strict=True):
            if row < 0:
                continue
            memory_id = row_ids[row]
            memory = store.get(memory_id) if memory_id is not None else None
            if memory is not None:  # None only if deleted concurrently
                found.append((memory, float(score)))
        results.append(found)
    return results


def _score_with_context(
    engine: EmotionalMemory, texts: Sequence[str], embeddings: Sequence[np.ndarray | None],
    affects: Sequence[CoreAffect], top_k: int, now: datetime,
) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Pass-1 scores of every memory with s7 and, when on, s8 (the context signal),
    per query.

    Each query reads the whole view as one candidate bank with its term statistics
    (the store's own answer to a full-bank lexical read) and scores it with the
    kernel's seven- or eight-signal score: the very weights, s7 and s8 a retrieve over
    every memory computes in pass 1.

    Args:
        engine: the engine.
        texts: the queries.
        embeddings: per query its float64 (adapted) embedding, None for none.
        affects: per query its affect (s3).
        top_k: results per query.
        now: the scoring time.

    Returns:
        ``(index (Q, top_k) int64, scores (Q, top_k) float64, ids)``: rows index
        ``ids``, every query's winners in turn (each query reads the store once, so
        rows of one read do not index another's); -1 / -inf where the store holds
        fewer.
    """
    derived = engine._derived()
    cfg = engine.config.retrieval
    store = engine._view(now)
    links = view_neighbours(store, now, derived.context_window) if derived.context_on else None
    state = engine.get_state()
    index = np.full((len(texts), top_k), -1, dtype=np.int64)
    scores = np.full((len(texts), top_k), -np.inf, dtype=np.float64)
    ids: list[str | None] = []
    for i, text in enumerate(texts):
        terms = query_terms(text, derived.stop_words, derived.analysis, derived.query_counts)
        bank = store.candidate_bank(
            embeddings[i], None, now, lexical=LexicalQuery(
                terms, 0, cfg.lexical_k1, cfg.lexical_b, statistics=True,
                analysis=derived.analysis,
            ),
        )
        if not len(bank) or bank.lexical is None:
            continue
        size = bank.columns.size
        context = None
        if links is not None:
            rows = np.full((size, 2), -1, np.int32)
            rows[: len(bank)] = neighbour_rows(bank.ids, links)
            context = ContextInputs(neighbours=rows)
        embedding = embeddings[i]
        query = query_features(embedding, affects[i], state.mood, state.momentum, bank.dim)
        params = params_from_config(cfg, engine.config.decay,
                                    base_weights=list(engine._route(text)))
        with float64():
            totals = np.asarray(_context_scores(
                params, query, bank.columns, pad_lexical(bank.lexical, size),
                context,
                None if derived.mask is None else np.asarray(derived.mask),
            ))
        order = np.argsort(-totals[: len(bank)], kind="stable")[:top_k]
        # this query's winners by id now: a later query's read may see other rows
        index[i, : len(order)] = np.arange(len(ids), len(ids) + len(order))
        ids.extend(bank.ids[int(j)] for j in order)
        scores[i, : len(order)] = totals[order]
    return index, scores, ids


def _context_scores_unjitted(
    params: Any, query: QueryFeatures, columns: MemoryColumns, lexical: Any, context: Any,
    mask: Any,
) -> Any:
    return score_bank(params, query, columns, mask, lexical, context).totals


def score_queries(
    engine: EmotionalMemory,
    queries: Sequence[str],
    top_k: int = 5,
    *,
    query_affects: Sequence[CoreAffect | None] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[list[tuple[Memory, float]]]:
    """Score ``queries`` against the engine's whole store (read-only; pass-1 score).

    Shortcut for ``BatchRetriever(engine, chunk_size=chunk_size).score(...)``; see
    :class:`BatchRetriever` for what is (and is not) computed.

    Args:
        engine: the engine to read from.
        queries: query texts.
        top_k: memories per query (>= 1; bucketed as in :meth:`BatchRetriever.score`).
        query_affects: optional per-query affects for s3.
        chunk_size: memories per scan step.

    Returns:
        One list of ``(memory, score)`` pairs per query, best first.
    """
    return BatchRetriever(engine, chunk_size=chunk_size).score(
        queries, top_k, query_affects=query_affects
    )


def _embed_all(embedder: Any, texts: list[str]) -> Sequence[Any] | np.ndarray:
    """One embedding per text: ``embed_batch`` if the embedder has it, else ``embed``
    text by text (as ``encode_batch`` does). ``embed_batch`` may return a sequence of
    vectors or one (Q, D) numpy or JAX array.

    Raises:
        TypeError: ``embed_batch`` returned no sequence (None, a number, a generator).
        ValueError: it returned a different number of embeddings.
    """
    batch = getattr(embedder, "embed_batch", None)
    raw = batch(texts) if callable(batch) else [embedder.embed(t) for t in texts]
    if isinstance(raw, jax.Array):  # one (Q, D) array from a JAX embedder
        raw = np.asarray(raw)
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence | np.ndarray):
        raise TypeError(
            f"embedder.embed_batch must return a sequence of embeddings, got "
            f"{type(raw).__name__}"
        )
    if len(raw) != len(texts):
        raise ValueError(f"embedder returned {len(raw)} embeddings for {len(texts)} queries")
    return raw


def _unit_float32(vector: np.ndarray) -> np.ndarray:
    """A float64 query embedding as the float32 unit vector of its direction.

    Cosines do not depend on the query's scale, while a float32 cast of its raw values
    can overflow to inf (every total NaN) or underflow to zero (cosine 0). A vector
    that is zero or holds NaN / an infinity is only cast (the kernel scores it
    cosine 0, docs/behaviour.md §4).

    Args:
        vector: (D,) float64 embedding.

    Returns:
        (D,) float32.
    """
    peak = float(np.max(np.abs(vector)))
    if not math.isfinite(peak) or peak == 0.0:
        return vector.astype(np.float32)
    scaled = vector / peak  # entries in [-1, 1]: the norm neither overflows nor underflows
    out: np.ndarray = (scaled / np.linalg.norm(scaled)).astype(np.float32)
    return out


def _check_queries(engine: EmotionalMemory, queries: Any) -> list[str]:
    if isinstance(queries, str | bytes) or not isinstance(queries, Sequence):
        raise TypeError(f"queries must be a sequence of str, got {type(queries).__name__}")
    return [engine._check_content(q, f"queries[{i}]") for i, q in enumerate(queries)]


def _check_affects(affects: Any, n: int) -> list[CoreAffect | None]:
    if affects is None:
        return [None] * n
    if isinstance(affects, CoreAffect) or not isinstance(affects, Sequence):
        raise TypeError("query_affects must be a sequence of CoreAffect (or None) or None")
    if len(affects) != n:
        raise ValueError(f"query_affects must have one entry per query ({n}), got {len(affects)}")
    for i, a in enumerate(affects):
        if a is not None and not isinstance(a, CoreAffect):
            raise TypeError(f"query_affects[{i}] must be a CoreAffect or None")
    return list(affects)


def _bank(
    engine: EmotionalMemory, now: Any
) -> tuple[list[str | None], MemoryColumns, int | None]:
    """The memories the engine (view) sees as float32 JAX columns padded to a power
    of two (:meth:`~emotional_memory.stores.columnar.ColumnarStore.scoring_bank`; a
    scoped view's other rows are invalid).

    Returns:
        ``(row_ids, columns, dim)``: the memory id of each row (None on padding and
        unseen rows), the columns, and the store's embedding dimension (None when no
        memory has one).
    """
    out: tuple[list[str | None], MemoryColumns, int | None] = engine._view(
        now if isinstance(now, datetime) else None
    ).scoring_bank(now, np.float32)
    return out


_context_scores = jax.jit(_context_scores_unjitted)
"""The eight-signal pass-1 totals of one query over a bank, compiled per bank shape."""
