"""The store contract: a view's batch retrieval, pages, relevance threshold and
expiry answer as a separate engine's, over every backend.

``test_contract_scopes`` checks ``retrieve``, tags and state after random sibling
operations. Here, after the same operations (with memories of an outer scope, the
root and a sub-scope around the compared views, some of them expiring): the
read-only batch retrieval (``score_queries``, with the lexical and context signals
on and off), ``list_all`` pages with and without ``where``, ``retrieve`` with
``min_relevance``, and ``prune`` / ``export_memories`` once some memories have
expired, on each view and on a separate engine holding only its memories, over a
store of the same backend (batch retrieval scores in float32 from the store's own
search matrix).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.batch_retrieval import score_queries
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.retrieval import RelevanceCalibration, RetrievalConfig
from support.backends import ENGINES, Backend, oracle_store
from support.scopes import SCOPES, T0, WORDS, Clock, operation, run_scoped_operations, tags

SIGNALS = {
    "plain": {},
    "lexical": {"lexical_weight": 0.3, "hybrid_candidates": True},
    "context": {"context_weight": 0.2},
}
CALIBRATION = RelevanceCalibration(slope=6.0, intercept=-2.5)
QUERIES = ["rain storm", "dog music note", "exam", "harbour bridge coffee"]
PAGES = [(0, 1), (1, 2), (2, None), (0, 0), (5, 3)]


def same_scores(got: list[list[tuple[Any, float]]], want: list[list[tuple[Any, float]]]
                ) -> None:
    """``score_queries``' answers equal by content and order, the float32 scores to a
    few ulps: the kernel's float32 rounding depends on the padded bank's shape, and a
    view's bank is the whole store's rows with the others masked (other scopes' rows count)."""
    assert [[m.content for m, _ in r] for r in got] == [[m.content for m, _ in r] for r in want]
    for r, w in zip(got, want, strict=True):
        np.testing.assert_allclose([s for _, s in r], [s for _, s in w], rtol=1e-6)


def surround(engine: EmotionalMemory, clock: Clock) -> None:
    """Memories a compared view never sees, or must see under its own path: the
    root's, an outer scope's, and some expiring soon (a sub-scope's too)."""
    clock.now = T0 - timedelta(minutes=30)
    engine.encode("rain storm at the root")
    engine.scoped("zed").encode_batch([f"{WORDS[i]} music note" for i in range(10)])
    engine.scoped("zed").encode("exam soon", expires_at=T0 + timedelta(minutes=20))


@pytest.mark.parametrize("signals", list(SIGNALS))
@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(operation, min_size=3, max_size=14), top_k=st.integers(1, 6),
       threshold=st.floats(0.0, 1.0))
def test_reads_of_a_view_answer_as_a_separate_engine(
    backend: Backend, signals: str, ops: list[tuple[Any, ...]], top_k: int, threshold: float,
) -> None:
    clock = Clock()
    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        relevance_calibration=CALIBRATION, **SIGNALS[signals]))
    embedder = HashingEmbedder(dim=32)
    shared = EmotionalMemory(backend.new(), embedder, config=config, clock=clock)
    surround(shared, clock)
    views = [shared.scoped(s) for s in SCOPES]
    alone = [EmotionalMemory(backend.new(), embedder, config=config, clock=clock)
             for _ in SCOPES]
    run_scoped_operations(views, alone, clock, ops)
    for view, oracle in zip(views, alone, strict=True):
        same_scores(score_queries(view, QUERIES, top_k), score_queries(oracle, QUERIES, top_k))
        for offset, limit in PAGES:
            for where in (None, {"step": {"$gte": 3}}):
                assert tags(view.list_all(where=where, limit=limit, offset=offset)) == tags(
                    oracle.list_all(where=where, limit=limit, offset=offset)), (offset, limit)
        got = view.retrieve_with_explanations(QUERIES[0], top_k, min_relevance=threshold)
        want = oracle.retrieve_with_explanations(QUERIES[0], top_k, min_relevance=threshold)
        assert [(r.memory.content, r.score, r.relevance) for r in got] == [
            (r.memory.content, r.score, r.relevance) for r in want]
        assert tags(view.list_all()) == tags(oracle.list_all())  # the same side effects


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_expiry_and_prune_of_a_view_answer_as_a_separate_engine(backend: Backend) -> None:
    """Memories of a view, its sub-scope and a sibling expire at the same moments:
    the view reads, prunes and exports what a separate engine holding its subtree
    does, and the sibling keeps its expired memories until it prunes itself.

    The root of a plain protocol-only store links through the store's own search,
    expired memories included (``EncodingMixin._linker``): no oracle for expiry, so
    there the oracle is the in-memory store."""
    clock = Clock()
    embedder = HashingEmbedder(dim=32)
    shared = EmotionalMemory(backend.new(), embedder, clock=clock)
    oracle = EmotionalMemory(oracle_store() if backend.generic else backend.new(), embedder,
                             clock=clock)
    view, sibling = shared.scoped("alice"), shared.scoped("bob")
    pairs = [(view, oracle), (view.scoped("s1"), oracle.scoped("s1"))]
    for i in range(12):
        clock.now = T0 + timedelta(minutes=5 * i)
        soon = T0 + timedelta(minutes=40 + 10 * (i % 3)) if i % 2 else None
        text = f"{WORDS[i % 10]} {WORDS[(3 * i) % 10]} {i}"
        for a, b in pairs if i % 3 == 0 else pairs[:1]:
            assert a.encode(text, expires_at=soon).expires_at == b.encode(
                text, expires_at=soon).expires_at
        sibling.encode(text, expires_at=soon)
        shared.encode(text, expires_at=soon)
    for minutes in (45, 55, 65):
        clock.now = T0 + timedelta(minutes=minutes)
        for a, b in pairs:
            assert tags(a.list_all()) == tags(b.list_all())
            assert len(a) == len(b)
            same_scores(score_queries(a, ["rain dog"], 4), score_queries(b, ["rain dog"], 4))
            assert [m.content for m in a.retrieve("rain dog", 3)] == [
                m.content for m in b.retrieve("rain dog", 3)]
        assert view.prune(0.0) == oracle.prune(0.0)
        assert [m["content"] for m in view.export_memories()] == [
            m["content"] for m in oracle.export_memories()]
    kept = shared.export_memories()
    assert {tuple(m["scope"]) for m in kept} == {(), ("alice",), ("alice", "s1"), ("bob",)}
    # the view's prunes left the sibling's and the root's expired memories alone
    assert sibling.prune(0.0) == 6
    assert shared.prune(0.0) == 6
