"""A store's own confined view (``selected(selection)``) compared with the in-memory
store's: scopes, nested scopes, ``where`` filters and expiry, before and after some
memories expire."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import numpy as np

from emotional_memory.filters import parse_where
from emotional_memory.stores.base import Now, Selection
from support.memories import indexed_memory, memory_key
from support.scopes import SCOPES, T0

CASES: list[tuple[tuple[str, ...], dict[str, Any] | None]] = [
    ((), None), (("alice",), None), (("bob",), {"odd": True}), (("carol", "s1"), None),
    (("alice",), {"i": {"$gte": 30}}), ((), {"$or": [{"i": {"$lt": 5}}, {"odd": False}]}),
]
"""``(scope, where)`` of each selection checked."""


def fill_selection_bank(stores: list[Any], n: int = 70, seed: int = 3) -> None:
    """Save the same ``n`` memories in every store: 8-d embeddings (one zero, one NaN,
    one missing), three scopes with a nested ``s1``, metadata ``i`` and ``odd``, every
    seventh expiring 30 minutes after ``T0``."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        embedding = rng.normal(size=8).round(3).tolist()
        if i == 20:
            embedding = [0.0] * 8
        if i == 21:
            embedding = [math.nan] + [1.0] * 7
        m = indexed_memory(i, None if i == 22 else embedding)
        m = m.model_copy(update={
            "scope": (SCOPES[i % 3],) if i % 5 else (SCOPES[i % 3], "s1"),
            "metadata": {"i": i, "odd": bool(i % 2)},
            "expires_at": T0 + timedelta(minutes=30) if i % 7 == 0 else None,
        })
        for store in stores:
            store.save(m)


def check_selections(
    store: Any, oracle: Any, seed: int = 5,
    cases: list[tuple[tuple[str, ...], dict[str, Any] | None]] = CASES,
) -> None:
    """Every selection of ``cases``, at ``T0`` and 45 minutes later: ``list_all``,
    ``len``, ``in``, ``get`` and ``search_by_embedding`` (k 1, 4, 25) of
    ``store.selected`` equal the oracle's."""
    rng = np.random.default_rng(seed)
    for scope, where in cases:
        for minutes in (0, 45):  # before and after some expire
            selection = Selection(scope, parse_where(where), Now(T0 + timedelta(minutes=minutes)))
            got, want = store.selected(selection), oracle.selected(selection)
            assert [m.id for m in got.list_all()] == [m.id for m in want.list_all()]
            assert len(got) == len(want)
            for m in oracle.list_all()[::7]:  # members and not: ``in`` and ``get`` agree
                assert (m.id in got) is (m.id in want), (scope, where, minutes, m.id)
                assert memory_key(got.get(m.id)) == memory_key(want.get(m.id)), (
                    scope, where, minutes, m.id)
            for _ in range(3):
                query = rng.normal(size=8).tolist()
                for k in (1, 4, 25):
                    assert [m.id for m in got.search_by_embedding(query, k)] == [
                        m.id for m in want.search_by_embedding(query, k)
                    ], (scope, where, minutes, k)
