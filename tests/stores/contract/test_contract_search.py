"""The store contract, part 2: search.

The ranking rule itself (float64 cosine, NaN and zero norms score 0, exact ties to
the later-inserted memory, a query without direction gives the first embedded memories) is
checked on adversarial banks by ``test_exact_ranking.py``. Here: the edges of
``search_by_embedding`` on every backend, its answers staying the oracle's while
memories are replaced (embeddings appearing, changing, disappearing), deleted and
added, and the engine ranking identically (scores, breakdowns, side effects) over
every backend and over a plain protocol-only store.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from support.backends import ENGINES, Backend, oracle_store
from support.memories import basic_memory as mem
from support.memories import indexed_memory
from support.scopes import tags

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def ids(memories: list[Any]) -> list[str]:
    return [m.id for m in memories]


def test_search_edges(backend: Backend) -> None:
    store = backend.new()
    assert store.search_by_embedding([1.0, 2.0], 3) == []  # empty store
    plain = mem("plain")
    store.save(plain)
    assert store.search_by_embedding([1.0, 2.0], 3) == []  # nothing embedded
    a, b = mem("a", [1.0, 0.0]), mem("b", [0.0, 1.0])
    store.save(a)
    store.save(b)
    assert store.search_by_embedding([1.0, 0.0], 0) == []
    assert store.search_by_embedding([1.0, 0.0], -3) == []
    assert ids(store.search_by_embedding([1.0, 0.0], 10)) == [a.id, b.id]  # k > count
    with pytest.raises(ValueError, match="embedding"):
        store.search_by_embedding([1.0, 0.0, 0.0], 3)  # another dimension


def test_search_stays_the_oracles_through_replaces_deletes_and_adds(backend: Backend) -> None:
    store, oracle = backend.new(), oracle_store()
    rng = np.random.default_rng(7)
    memories = [indexed_memory(i, rng.normal(size=8).round(3).tolist()) for i in range(60)]
    memories.append(indexed_memory(60, None))  # never returned
    memories.append(indexed_memory(61, [0.0] * 8))  # zero norm: similarity 0
    memories.append(indexed_memory(62, [math.nan] + [1.0] * 7))  # NaN: similarity 0
    memories.append(indexed_memory(63, memories[5].embedding))  # a tie with 5
    for m in memories:
        store.save(m)
        oracle.save(m)

    def agree(stage: str) -> None:
        queries = [rng.normal(size=8).tolist() for _ in range(3)]
        queries += [[0.0] * 8, (-np.asarray(memories[0].embedding)).tolist()]
        for q, query in enumerate(queries):
            for k in (1, 3, 10, 40, 70):
                assert ids(store.search_by_embedding(query, k)) == ids(
                    oracle.search_by_embedding(query, k)), (stage, q, k)

    agree("saved")
    for i in range(0, 60, 6):  # replaced: changed, removed, or given an embedding
        embedding = None if i % 12 == 0 else rng.normal(size=8).round(3).tolist()
        again = memories[i].model_copy(update={"embedding": embedding})
        store.update(again)
        oracle.update(again)
    store.update(memories[60].model_copy(update={"embedding": memories[7].embedding}))
    oracle.update(memories[60].model_copy(update={"embedding": memories[7].embedding}))
    agree("replaced")
    for i in range(1, 60, 4):
        assert store.delete(memories[i].id) is oracle.delete(memories[i].id) is True
    for i in range(64, 74):
        m = indexed_memory(i, rng.normal(size=8).round(3).tolist())
        store.save(m)
        oracle.save(m)
    agree("deleted and added")
    assert ids(store.list_all()) == ids(oracle.list_all())


# -------------------------------------------------------------------- the engine

TEXTS = [
    "I won the lottery and cried with joy",
    "My grandmother passed away this morning",
    "The meeting was boring and ran late",
    "We celebrated our anniversary at the beach",
    "I was terrified during the turbulence on the flight",
    "Got a parking ticket, so annoying",
    "Our team shipped the release on time",
    "The kids built a sandcastle at the beach",
    "Argued with my landlord about the broken heater",
    "A stranger helped me carry groceries home",
    "I failed the driving test again",
    "Hiking at sunrise felt peaceful",
]


class StepClock:
    """30 seconds later at every reading."""

    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=30)
        return self.t


def _run(store: Any) -> tuple[list[Any], list[Any]]:
    """Encode, retrieve (with side effects), explain: what an engine answered, and
    the memories it left."""
    em = EmotionalMemory(store, HashingEmbedder(), clock=StepClock())
    em.encode_batch(TEXTS[:6])
    for t in TEXTS[6:]:
        em.encode(t)
    out: list[Any] = []
    # top_k=2 of 12 memories: candidates come from the store's search
    for query, k in [("beach holiday", 2), ("scary flight", 3), ("bad news", 12)]:
        out.append([(e.memory.content, e.score, tuple(e.breakdown.raw_signals))
                    for e in em.retrieve_with_explanations(query, top_k=k)])
    out.append([m.content for m in em.retrieve("release", top_k=4)])
    return out, tags(em.list_all())


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_the_engine_ranks_identically_over_every_backend(backend: Backend) -> None:
    assert _run(backend.new()) == _run(oracle_store())
