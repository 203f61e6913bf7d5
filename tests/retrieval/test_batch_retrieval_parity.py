"""``score_queries`` against an independent oracle: for every query a freshly built
engine (the same memories, the same frozen clock) answers
``retrieve_with_explanations`` with spreading activation off and every memory a
candidate, which is then exactly the pass-1 ranking the batch API promises. Checked
with the opt-in lexical signal s7 alone, with the context signal s8 (which brings s7),
with s7 switched off by ``enable_lexical``, and in a scoped view.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.batch_retrieval import score_queries
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.retrieval.config import RetrievalConfig
from emotional_memory.stores import InMemoryStore

TEXTS = ["coffee with Ana", "the launch party", "rain in Lisbon", "budget meeting",
         "coffee again", "a storm at night", "the train was late", "exam results"]
QUERIES = ["coffee", "storm night", "Lisbon rain", "exam"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _engine(config: EmotionalMemoryConfig, scope: str | None) -> EmotionalMemory:
    """The memories encoded a minute apart (alternately in scopes "a" and "b" when
    ``scope`` is given), the clock then frozen an hour later."""
    now = [T0]
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), config=config,
                             clock=lambda: now[0])
    for i, text in enumerate(TEXTS):
        now[0] = T0 + timedelta(minutes=i)
        target = engine.scoped("a" if i % 2 else "b") if scope else engine
        target.set_affect(CoreAffect(valence=math.sin(i), arousal=0.5))
        target.encode(text)
    now[0] = T0 + timedelta(hours=1)
    return engine.scoped(scope) if scope else engine


@pytest.mark.parametrize(
    ("scope", "switches", "retrieval"),
    [
        (None, {}, {}),
        (None, {}, {"lexical_weight": 0.5}),
        ("a", {}, {"lexical_weight": 0.5}),
        (None, {"enable_lexical": False}, {"lexical_weight": 0.5}),
        (None, {}, {"lexical_weight": 0.3, "context_weight": 0.3}),
        ("a", {}, {"lexical_weight": 0.3, "context_weight": 0.3}),
    ],
    ids=["six-signals", "lexical", "lexical-scoped", "lexical-switched-off", "context",
         "context-scoped"],
)
def test_score_queries_ranks_as_a_full_bank_retrieve_without_resonance(
    scope: str | None, switches: dict[str, Any], retrieval: dict[str, Any]
) -> None:
    config = EmotionalMemoryConfig(
        enable_resonance=False, **switches,
        retrieval=RetrievalConfig(full_bank_candidates=True, **retrieval),
    )
    got = score_queries(_engine(config, scope), QUERIES, top_k=3)
    for query, results in zip(QUERIES, got, strict=True):
        want = _engine(config, scope).retrieve_with_explanations(query, top_k=3)
        assert [m.content for m, _ in results] == [e.memory.content for e in want], query
        np.testing.assert_allclose([s for _, s in results], [e.score for e in want],
                                   rtol=0, atol=1e-5, err_msg=query)


def test_a_memory_deleted_between_queries_does_not_shift_earlier_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With s7 on, each query reads the store once: a memory deleted (by another
    thread) after the first query's read shifted every row of the later bank, and the
    first query's rows were read against it (other memories, other scores)."""
    config = EmotionalMemoryConfig(enable_resonance=False,
                                   retrieval=RetrievalConfig(lexical_weight=0.5))
    engine = _engine(config, None)
    want = score_queries(_engine(config, None), ["coffee"], top_k=3)[0]
    assert "the launch party" not in [m.content for m, _ in want]
    view = engine._view
    reads = []

    class DeletingView:
        """The engine's view; the second candidate read first deletes a memory."""

        def __init__(self, store: Any) -> None:
            self.store = store

        def __getattr__(self, name: str) -> Any:
            return getattr(self.store, name)

        def candidate_bank(self, *args: Any, **kwargs: Any) -> Any:
            reads.append(1)
            if len(reads) == 2:
                (gone,) = [m for m in engine.list_all() if m.content == "the launch party"]
                engine.store.delete(gone.id)
            return self.store.candidate_bank(*args, **kwargs)

    monkeypatch.setattr(engine, "_view", lambda *a, **k: DeletingView(view(*a, **k)))
    got = score_queries(engine, ["coffee", "storm night"], top_k=3)[0]
    assert len(reads) == 2
    assert [m.content for m, _ in got] == [m.content for m, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-9)
