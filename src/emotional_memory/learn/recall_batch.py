"""RecallBatch: what the ranker saw for every labelled query, as one padded pytree.

Each scenario is replayed through the real engine (the replay protocol of
:mod:`emotional_memory.replay`). At every query the engine's ranking plan is
captured: the candidates in candidate order, their columns at query time, the
query features, and the spreading activation the runtime computed from its pass-1
seeds. Training differentiates the pass-2 score with that activation held fixed
(the seed choice is a discrete top-k; DESIGN "Learning").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Bool, Float, Int

from emotional_memory._bank import columns_from_memories
from emotional_memory._context import neighbour_rows, view_neighbours
from emotional_memory._precision import float64
from emotional_memory._progress import progress_iter
from emotional_memory._validation import positive_int
from emotional_memory.engine import EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.interfaces import Embedder
from emotional_memory.kernel import (
    ContextInputs,
    LexicalInputs,
    MemoryColumns,
    QueryFeatures,
    bank_cosine,
)
from emotional_memory.kernel._types import Array
from emotional_memory.lexical import query_terms, stop_word_set
from emotional_memory.replay import (
    ReplayAffect,
    TickClock,
    default_engine_factory,
    iter_scenarios,
    replay_scenario,
    validate_dataset,
)
from emotional_memory.retrieval import RetrievalPlan


class RecallBatch(eqx.Module):
    """Padded arrays for Q labelled queries with up to C candidates each.

    Attributes:
        semantic: (Q, C) cosine of query and candidate (fixed: embeddings are inputs).
        columns: candidate columns with leaves (Q, C, ...); ``embedding`` is (Q, C, 0)
            because s1 is precomputed, or (Q, C, D) when the batch was built with
            ``embeddings=True`` (to fit a query adapter); ``activation`` is the
            runtime's pass-2 input.
        query: query features with leaves (Q, ...); ``embedding`` is (Q, 0), or the
            (Q, D) query embeddings as embedded (before any adapter).
        labels: (Q, C) True for expected memories.
        challenge: (Q,) challenge-type index into ``RecallInfo.challenge_names``.
        scenario: (Q,) scenario index into ``RecallInfo.scenario_ids``.
        lexical: optional term statistics for the lexical signal s7, leaves
            tf (Q, C, T), length (Q, C), df (Q, T), n_docs (Q,), avg_length (Q,).
        context: optional neighbours for the context signal s8: ``neighbours``
            (Q, C, 2), each candidate's encode-order neighbours among the query's
            candidates (-1: none), found as the engine finds them.
    """

    semantic: Float[Array, "Q C"]
    columns: MemoryColumns
    query: QueryFeatures
    labels: Bool[Array, "Q C"]
    challenge: Int[Array, " Q"]
    scenario: Int[Array, " Q"]
    lexical: LexicalInputs | None = None
    context: ContextInputs | None = None

    @property
    def n_queries(self) -> int:
        """Q."""
        return int(self.labels.shape[0])

    @property
    def n_candidates(self) -> int:
        """C (padded)."""
        return int(self.labels.shape[1])


@dataclass(frozen=True)
class RecallInfo:
    """Host-side metadata of a :class:`RecallBatch` (kept out of the pytree).

    Attributes:
        query_ids: per query.
        scenario_ids: distinct scenario ids, in dataset order.
        challenge_names: distinct challenge types, sorted.
        candidate_ids: per query, the dataset ids of its candidates (candidate order).
        top_k: results per query used by the replay.
    """

    query_ids: tuple[str, ...]
    scenario_ids: tuple[str, ...]
    challenge_names: tuple[str, ...]
    candidate_ids: tuple[tuple[str, ...], ...]
    top_k: int


@dataclass
class _Captured:
    scenario: str
    query_id: str
    challenge: str
    candidate_ids: list[str]
    labels: np.ndarray
    semantic: np.ndarray
    columns: MemoryColumns
    query: QueryFeatures
    lexical: LexicalInputs | None = None
    embedding: np.ndarray | None = None
    neighbours: np.ndarray | None = None


def _capture(
    plan: RetrievalPlan, scenario: str, query: dict[str, Any], id_map: dict[str, str],
    engine: EmotionalMemory | None = None, embeddings: EmotionalMemory | None = None,
    context: EmotionalMemory | None = None,
) -> _Captured:
    if plan.query is None or plan.now is None:
        raise ValueError(f"query {query.get('query_id')!r}: the plan has no candidates")
    cands = plan.candidates
    q = plan.query
    dim = int(np.asarray(q.embedding).shape[0])
    cols = columns_from_memories(cands, plan.now, dim, plan.activation_map)
    with float64():
        semantic = np.asarray(
            bank_cosine(jnp.asarray(q.embedding), jnp.asarray(cols.embedding)), np.float64
        )
    expected = {str(x) for x in query["expected_memory_ids"]}
    ids = [id_map.get(m.id, m.id) for m in cands]
    lexical = None
    if engine is not None:  # term statistics from the engine's store, at query time
        retrieval = engine.config.retrieval
        stop = stop_word_set(retrieval.lexical_stop_words)
        terms = query_terms(str(query["query"]), stop, retrieval.lexical_stemmer,
                            retrieval.lexical_query_counts)
        lexical = engine._columnar.lexical_inputs(
            terms, [m.id for m in cands], retrieval.lexical_stemmer
        )
    raw = None
    if embeddings is not None:  # the query as embedded (an adapter's input) and the rows
        raw = np.asarray(embeddings.embedder.embed(str(query["query"])), np.float64)
    neighbours = None
    if context is not None:  # the encode-order neighbours the engine would find now
        links = view_neighbours(context._view(plan.now), plan.now,
                                context.config.retrieval.context_window_seconds)
        neighbours = neighbour_rows([m.id for m in cands], links)
    return _Captured(
        neighbours=neighbours,
        embedding=raw,
        scenario=scenario,
        query_id=str(query.get("query_id", "")),
        challenge=str(query.get("challenge_type", "unknown")),
        candidate_ids=ids,
        labels=np.asarray([i in expected for i in ids], dtype=bool),
        semantic=semantic,
        columns=cols,
        query=q,
        lexical=lexical,
    )


def _pad(x: np.ndarray, size: int) -> np.ndarray:
    widths = [(0, size - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
    return np.pad(x, widths)


def stack_captured(captured: Sequence[_Captured], top_k: int) -> tuple[RecallBatch, RecallInfo]:
    """Pad and stack captured queries into a :class:`RecallBatch` (float64 numpy leaves).

    Args:
        captured: Per-query captures, in order; C is their largest candidate count.
        top_k: Results per query used by the replay (stored in the info).

    Returns:
        ``(batch, info)``: a batch with (Q, C, ...) candidate leaves (padding rows
        invalid) and its host-side metadata.

    Raises:
        ValueError: If ``captured`` is empty.
    """
    if not captured:
        raise ValueError("no labelled queries to build a RecallBatch from")
    size = max(len(c.candidate_ids) for c in captured)
    scenario_ids = tuple(dict.fromkeys(c.scenario for c in captured))
    challenge_names = tuple(sorted({c.challenge for c in captured}))

    def col(name: str) -> np.ndarray:
        return np.stack([_pad(np.asarray(getattr(c.columns, name)), size) for c in captured])

    n = len(captured)
    with_embeddings = all(c.embedding is not None for c in captured)
    columns = MemoryColumns(
        embedding=col("embedding") if with_embeddings else np.zeros((n, size, 0)),
        affect=col("affect"),
        mood=col("mood"),
        velocity=col("velocity"),
        age_seconds=col("age_seconds"),
        consolidation=col("consolidation"),
        retrieval_count=col("retrieval_count"),
        activation=col("activation"),
        valid=col("valid").astype(bool),
    )
    query = QueryFeatures(
        embedding=(np.stack([np.asarray(c.embedding) for c in captured]) if with_embeddings
                   else np.zeros((n, 0))),
        affect=np.stack([np.asarray(c.query.affect) for c in captured]),
        mood=np.stack([np.asarray(c.query.mood) for c in captured]),
        velocity=np.stack([np.asarray(c.query.velocity) for c in captured]),
    )
    lexical = None
    if all(c.lexical is not None for c in captured):
        lex = [c.lexical for c in captured]
        width = max(np.asarray(x.tf).shape[1] for x in lex if x is not None)
        tf = np.zeros((n, size, width))
        length = np.zeros((n, size))
        df = np.zeros((n, width))
        for i, x in enumerate(lex):
            assert x is not None
            xtf = np.asarray(x.tf)
            tf[i, : xtf.shape[0], : xtf.shape[1]] = xtf
            length[i, : xtf.shape[0]] = np.asarray(x.length)
            df[i, : xtf.shape[1]] = np.asarray(x.df)
        lexical = LexicalInputs(
            tf=tf, length=length, df=df,
            n_docs=np.asarray([float(np.asarray(x.n_docs)) for x in lex if x is not None]),
            avg_length=np.asarray([float(np.asarray(x.avg_length)) for x in lex
                                   if x is not None]),
        )
    context = None
    if all(c.neighbours is not None for c in captured):
        rows = np.full((n, size, 2), -1, np.int32)
        for i, c in enumerate(captured):
            assert c.neighbours is not None
            rows[i, : len(c.neighbours)] = c.neighbours
        context = ContextInputs(neighbours=rows)
    batch = RecallBatch(
        context=context,
        semantic=np.stack([_pad(c.semantic, size) for c in captured]),
        columns=columns,
        query=query,
        labels=np.stack([_pad(c.labels, size) for c in captured]),
        challenge=np.asarray([challenge_names.index(c.challenge) for c in captured], np.int32),
        scenario=np.asarray([scenario_ids.index(c.scenario) for c in captured], np.int32),
        lexical=lexical,
    )
    info = RecallInfo(
        query_ids=tuple(c.query_id for c in captured),
        scenario_ids=scenario_ids,
        challenge_names=challenge_names,
        candidate_ids=tuple(tuple(c.candidate_ids) for c in captured),
        top_k=top_k,
    )
    return batch, info


def build_recall_batch(
    data: dict[str, Any],
    embedder: Embedder,
    config: EmotionalMemoryConfig | None = None,
    *,
    top_k: int | None = None,
    progress: bool = False,
    lexical: bool = False,
    full_bank: bool = False,
    affect: ReplayAffect | None = None,
    embeddings: bool = False,
    context: bool = False,
) -> tuple[RecallBatch, RecallInfo]:
    """Replay every scenario through the engine and capture what the ranker saw.

    Args:
        data: a realistic-recall dataset (:func:`emotional_memory.replay.load_dataset`).
        embedder: the text embedder.
        config: engine configuration used for the replay (and the activation input).
        top_k: results per query (default: the dataset's ``default_top_k`` or 2).
        progress: draw a progress bar.
        lexical: also capture the term statistics of the lexical signal s7; the
            replay then ranks hybrid candidates (the semantic and the lexical
            shortlists, ``hybrid_candidates``), so a fit sees the memories the
            semantic shortlist misses, as the engine with s7 on does.
        full_bank: rank every memory of the store at each query
            (``full_bank_candidates``).
        affect: unlabelled events and queries (default: estimated when needed,
            :meth:`ReplayAffect.prepare`).
        embeddings: keep the query and candidate embeddings in the batch (to fit the
            query adapter; (Q, C, D) floats).
        context: capture each candidate's encode-order neighbours (the context signal
            s8); the replay then adds the shortlist's neighbours to the candidates
            (``context_candidates``), as the engine with s8 on does.

    Returns:
        ``(batch, info)``: float64 numpy leaves, and host metadata.

    Raises:
        ValueError: a malformed dataset (:func:`~emotional_memory.replay.validate_dataset`)
            or ``top_k`` < 1.
        TypeError: ``top_k`` is not an int (or is a bool).
    """
    validate_dataset(data)
    k = positive_int("top_k", top_k if top_k is not None else data.get("default_top_k", 2))
    cfg = config if config is not None else EmotionalMemoryConfig()
    if lexical or full_bank or context:
        cfg = cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(update={
            "hybrid_candidates": cfg.retrieval.hybrid_candidates or lexical,
            "full_bank_candidates": cfg.retrieval.full_bank_candidates or full_bank,
            "context_candidates": cfg.retrieval.context_candidates or context,
        })})
    settings = affect if affect is not None else ReplayAffect.prepare(data)
    factory = default_engine_factory(cfg)
    captured: list[_Captured] = []
    scenarios = list(iter_scenarios(data))
    for scenario in progress_iter(scenarios, "capture", enabled=progress):
        sid = str(scenario.get("scenario_id", ""))
        clock = TickClock()
        engine: EmotionalMemory = factory(embedder, clock)

        def hook(
            eng: EmotionalMemory, query: dict[str, Any], id_map: dict[str, str],
            plan: RetrievalPlan, sid: str = sid,
        ) -> None:
            captured.append(_capture(plan, sid, query, id_map, eng if lexical else None,
                                     eng if embeddings else None, eng if context else None))

        try:
            replay_scenario(scenario, engine, k, on_query=hook, affect=settings, clock=clock)
        finally:
            engine.close()
    return stack_captured(captured, k)
