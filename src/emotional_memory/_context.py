"""Host side of the context signal s8: who encoded next to whom, from stored data.

The neighbours of a memory are the memories of the same store view (the retrieving
scope) encoded just before and just after it: memories ordered by their tags'
timestamps, ties in the store's order (insertion order). With a time window, a
neighbour encoded further away than the window does not count. Nothing here reads a
dataset's ids: only what the store holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

Neighbours = dict[str, tuple[str | None, str | None]]
"""Memory id -> (the id encoded just before it, the id encoded just after it)."""


def encode_neighbours(
    ids: Sequence[str], age_seconds: Any, window_seconds: float | None = None
) -> Neighbours:
    """Each memory's neighbours in encode order.

    Args:
        ids: (N,) memory ids in the store's order.
        age_seconds: (N,) their ages at one instant (``now - tag.timestamp``): the
            oldest memory was encoded first; equal ages keep the store's order.
        window_seconds: optional: neighbours whose ages differ by more than this are
            not neighbours.

    Returns:
        id -> (previous id or None, next id or None).
    """
    ages = np.asarray(age_seconds, np.float64).reshape(-1)
    if ages.shape[0] != len(ids):
        raise ValueError(f"age_seconds must hold {len(ids)} ages, got {ages.shape[0]}")
    order = np.argsort(-ages, kind="stable").tolist()
    out: Neighbours = {}
    for pos, i in enumerate(order):
        prev = order[pos - 1] if pos > 0 else None
        nxt = order[pos + 1] if pos + 1 < len(order) else None
        if window_seconds is not None:
            if prev is not None and abs(ages[prev] - ages[i]) > window_seconds:
                prev = None
            if nxt is not None and abs(ages[nxt] - ages[i]) > window_seconds:
                nxt = None
        out[ids[i]] = (None if prev is None else ids[prev], None if nxt is None else ids[nxt])
    return out


def view_neighbours(store: Any, now: datetime, window_seconds: float | None) -> Neighbours:
    """:func:`encode_neighbours` of every memory a store (or scoped view) holds.

    Args:
        store: a :class:`~emotional_memory.stores.columnar.ColumnarStore` (or view).
        now: aware datetime for the ages.
        window_seconds: the optional time window.

    Returns:
        id -> (previous id or None, next id or None).
    """
    ids, columns = store.columns(now)
    return encode_neighbours(list(ids), columns.age_seconds, window_seconds)


def missing_neighbours(ids: Sequence[str], links: Mapping[str, tuple[str | None, str | None]]
                       ) -> list[str]:
    """The neighbours of ``ids`` that are not among them (first seen first).

    Args:
        ids: candidate ids.
        links: :func:`encode_neighbours`' answer.

    Returns:
        The ids to add so that every candidate's neighbours are candidates.
    """
    have = set(ids)
    extra: dict[str, None] = {}
    for mid in ids:
        for other in links.get(mid, (None, None)):
            if other is not None and other not in have:
                extra[other] = None
    return list(extra)


def neighbour_rows(
    ids: Sequence[str], links: Mapping[str, tuple[str | None, str | None]]
) -> np.ndarray:
    """The (N, 2) int32 rows of each candidate's neighbours among the candidates.

    Args:
        ids: the candidates' ids, in bank order.
        links: :func:`encode_neighbours`' answer.

    Returns:
        (N, 2) int32: column 0 the row of the memory encoded before, column 1 after;
        -1 where there is none or it is not a candidate.
    """
    row = {mid: i for i, mid in enumerate(ids)}
    out = np.full((len(ids), 2), -1, np.int32)
    for i, mid in enumerate(ids):
        prev, nxt = links.get(mid, (None, None))
        if prev is not None:
            out[i, 0] = row.get(prev, -1)
        if nxt is not None:
            out[i, 1] = row.get(nxt, -1)
    return out
