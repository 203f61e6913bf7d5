"""QdrantStore and ChromaStore searches break exact ties as the rule says: the
later-inserted memory first (``docs/stores.md``), above the sizes they rank whole.

The database proposes ``top_k`` + a margin of nearest candidates, which the store ranks
exactly. Among memories of one direction (the same text encoded again, or one
embedding at several norms) every candidate scores the same, so the database's pick
among them is arbitrary: the store returned other memories than the in-memory store's
latest ones. It now widens the candidates while the ``top_k``-th exact score does not
beat the worst candidate's by more than the database's float32 rounding.
"""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory.filters import parse_where
from emotional_memory.models import Memory
from emotional_memory.stores.base import Selection
from emotional_memory.stores.vectordb import base
from support.backends import Backend, oracle_store
from support.memories import basic_memory

DIRECTIONS = ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 1.0])


def _bank(n: int) -> list[Memory]:
    """``n`` memories over four directions at growing norms (exact cosine ties), half
    of them in scope ``("s", "0")``, the others in ``("s", "1")``."""
    out = []
    for i in range(n):
        vector = [x * (1 + i) for x in DIRECTIONS[i % 4]]
        memory = basic_memory(f"m{i}", vector, metadata={"i": i})
        out.append(memory.model_copy(update={"scope": ("s", str(i % 2))}))
    return out


@pytest.mark.parametrize("view", ["store", "scope", "where"])
def test_tied_candidates_go_to_the_latest_memories(
    backend: Backend, view: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # views above this many selected memories ask the database for neighbours
    monkeypatch.setattr(base, "_SMALL_SELECTION", 8)
    store, oracle = backend.new(), oracle_store()
    for memory in _bank(72):
        store.save(memory)
        oracle.save(memory)
    selection = {
        "scope": Selection(scope=("s",)),
        "where": Selection(where=parse_where({"i": {"$gte": 0}})),
    }.get(view)

    def searched(s: Any, query: list[float], k: int) -> list[str]:
        target = s if selection is None else s.selected(selection)
        return [m.content for m in target.search_by_embedding(query, k)]

    for query in ([1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.3, 0.2, 0.1]):
        for k in (1, 5, 30):
            assert searched(store, query, k) == searched(oracle, query, k), (query, k)
