"""Everything observable about a row-engine store (InMemoryStore, SQLiteStore), for
exact before/after comparisons, and a small bank to observe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from emotional_memory.models import Memory
from support.memories import basic_memory as mem

QUERIES = [[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
"""Queries of the bank ``populate`` saves (the last has no direction)."""


def ids(memories: list[Memory]) -> list[str]:
    """The ids of ``memories``, in order."""
    return [m.id for m in memories]


def state_of(store: Any, queries: Sequence[Sequence[float]] = ()) -> dict[str, Any]:
    """Everything observable about a store, for exact before/after comparisons."""
    mids, matrix, has = store.embedding_matrix()
    return {
        "memories": [m.model_dump() for m in store.list_all()],
        "ids": mids,
        "matrix": matrix.copy(),
        "has": has.copy(),
        "dim": store.dim,
        "len": len(store),
        "search": [ids(store.search_by_embedding(q, 3)) for q in queries],
    }


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two ``state_of`` results are identical (arrays element for element and shape)."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key])
            assert a[key].shape == b[key].shape
        else:
            assert a[key] == b[key], key


def populate(store: Any) -> list[Memory]:
    """Save six memories (4-d embeddings, one missing, one with metadata)."""
    ms = [
        mem("a", [1, 0, 0, 0]),
        mem("b", [0, 1, 0, 0]),
        mem("c"),
        mem("d", [1, 1, 0, 0], metadata={"k": 1}),
        mem("e", [0, 0, 1, 0]),
        mem("f", [0.5, 0.5, 0.5, 0.5]),
    ]
    for m in ms:
        store.save(m)
    return ms
