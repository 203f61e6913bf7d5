"""The transaction undo log of :class:`~emotional_memory.stores.InMemoryStore`.

Inside a transaction every write first logs what it is about to change (an insert,
a snapshot of the row it replaces or deletes, or only the old links of a row whose
links alone change); a failed block replays its entries
backwards, so it costs only what it did, not a copy of the whole store. Rolling back
drops the lexical index, which is rebuilt on next use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import cachetools
import numpy as np

from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import Memory
from emotional_memory.stores._shared.rows.columns import NEVER_US
from emotional_memory.stores._shared.rows.precision import EmbeddingPrecision


@dataclass(frozen=True)
class _RowState:
    """Everything one row holds, for the undo log."""

    arrays: tuple[np.ndarray, ...]  # one copy per name in InMemoryStore._ROW_ARRAYS
    matrix_row: np.ndarray
    content: str | None
    meta: dict[str, Any] | None
    links: Any
    exact: np.ndarray | None  # the float64 embedding kept aside, if any
    whole: Memory | None


@dataclass(frozen=True)
class _TagState:
    """What a write keeping the embedding changes in a row (``"tags"`` undo entries)."""

    tagf: np.ndarray
    tagi: np.ndarray
    place: tuple[int, int] | None  # scope id and expiry (None: the store holds none)
    content: str | None
    meta: dict[str, Any] | None
    links: Any
    whole: Memory | None


UndoKind = Literal["insert", "replace", "delete", "tags", "links"]

_Undo = tuple[UndoKind, str, int, "_RowState | _TagState | None", Any]
"""One entry of the transaction undo log: ``(kind, memory id, row, state, links)``.

``"insert"``: a new row (no state); ``"replace"`` / ``"delete"``: a snapshot of the
row (:class:`_RowState`); ``"tags"``: a replace that kept the stored embedding (only
the tag row and the row's references, :class:`_TagState`); ``"links"``: a write of
the row's packed links alone (``links``: the packed links before it).

A plain tuple (built by :func:`_undo`), not an object nor a named tuple: the entries
of inserts and link writes (the many of an ``encode_batch``) then hold only strings,
ints, None and packed link tuples, and the garbage collector stops tracking them the
first time it meets them instead of traversing each until the transaction ends (it
only untracks exact tuples)."""


def undo_entry(
    kind: UndoKind,
    memory_id: str,
    row: int,
    state: _RowState | _TagState | None = None,
    links: Any = None,
) -> _Undo:
    """An undo log entry (see :data:`_Undo`).

    Args:
        kind: what the write did.
        memory_id: the memory written.
        row: its row.
        state: the row's snapshot (``"replace"``, ``"delete"``, ``"tags"``).
        links: the row's packed links before the write (``"links"``).

    Returns:
        The entry.
    """
    return (kind, memory_id, row, state, links)


class UndoLog(EmbeddingPrecision):
    """Transaction levels, the undo log and rollback (a mixin, see :class:`RowColumns`)."""

    _undo: list[_Undo]
    _recent: cachetools.LRUCache[str, Memory]
    _whole: dict[str, Memory]
    _lexical: LexicalIndex | None
    _placed: bool  # some memory was stored with a scope or an expiry

    def _tx_begin(self) -> int:
        """Open a (possibly nested) transaction level; returns its undo-log mark."""
        self._tx_depth += 1
        return len(self._undo)

    def _tx_commit(self) -> None:
        """Close a transaction level, keeping its writes."""
        self._tx_depth -= 1
        if self._tx_depth == 0:
            self._undo.clear()
            self._maybe_compact()

    def _tx_rollback(self, mark: int) -> None:
        """Close a transaction level, undoing every write logged since ``mark``."""
        entries = self._undo[mark:]
        del self._undo[mark:]
        if entries:  # rebuilt on next use, in the rows' own order (ties keep it)
            self._lexical = None
        depth = self._tx_depth
        self._tx_depth = 0  # undo operations must not log themselves
        try:
            for kind, memory_id, row, state, links in reversed(entries):
                if kind == "insert":
                    self._remove(memory_id)
                elif kind == "links":
                    self._links[row] = links
                    self._recent.pop(memory_id, None)
                elif isinstance(state, _TagState):
                    self._restore_tags(row, memory_id, state)
                else:
                    assert state is not None
                    self._restore(row, memory_id, state, revive=kind == "delete")
        finally:
            self._tx_depth = depth - 1
        if self._tx_depth == 0:
            self._undo.clear()
            self._maybe_compact()

    def _tag_snapshot(self, row: int) -> _TagState:
        """What a write keeping ``row``'s embedding changes (for the undo log)."""
        mid = self._row_ids[row]
        return _TagState(
            tagf=self._tagf[row].copy(),
            tagi=self._tagi[row].copy(),
            place=(
                (int(self._scope_id[row]), int(self._expires_us[row]))
                if self._placed else None
            ),
            content=self._content[row],
            meta=self._meta[row],
            links=self._links[row],
            whole=self._whole.get(mid) if mid is not None else None,
        )

    def _restore_tags(self, row: int, memory_id: str, state: _TagState) -> None:
        """Put a :meth:`_tag_snapshot` back into ``row``."""
        self._recent.pop(memory_id, None)
        self._whole.pop(memory_id, None)
        self._tagf[row] = state.tagf
        self._tagi[row] = state.tagi
        # None: no memory had a scope or an expiry then, so the row held the fill values
        scope_id, expires_us = state.place if state.place is not None else (0, NEVER_US)
        self._scope_id[row] = scope_id
        self._expires_us[row] = expires_us
        self._version += 1
        self._content[row] = state.content
        self._meta[row] = state.meta
        self._links[row] = state.links
        if state.whole is not None:
            self._whole[memory_id] = state.whole

    def _snapshot(self, row: int) -> _RowState:
        """Everything ``row`` holds (for the undo log)."""
        mid = self._row_ids[row]
        return _RowState(
            arrays=tuple(np.array(getattr(self, name)[row]) for name in self._ROW_ARRAYS),
            matrix_row=self._matrix[row].copy(),
            content=self._content[row],
            meta=self._meta[row],
            links=self._links[row],
            exact=self._exact_row(row).copy() if self._aside[row] else None,
            whole=self._whole.get(mid) if mid is not None else None,
        )

    def _restore(self, row: int, memory_id: str, state: _RowState, *, revive: bool) -> None:
        """Put ``state`` back into ``row``: a replaced row, or a deleted one (``revive``)."""
        self._version += 1
        self._clear_embedding(row)
        self._recent.pop(memory_id, None)
        self._whole.pop(memory_id, None)
        if revive:
            self._row_ids[row] = memory_id
            self._row_of[memory_id] = row
            self._dead -= 1
        if state.arrays[self._ROW_ARRAYS.index("_has")]:
            width = state.matrix_row.shape[0]
            if self._dim is None:
                self._set_dim(width)
            self._matrix[row] = state.matrix_row
        elif self._matrix.shape[1]:
            self._matrix[row] = 0
        for name, value in zip(self._ROW_ARRAYS, state.arrays, strict=True):
            getattr(self, name)[row] = value
        self._side_slot[row] = -1  # (the snapshot's slot was freed: a new one below)
        self._content[row] = state.content
        self._meta[row] = state.meta
        self._links[row] = state.links
        if state.exact is not None:
            self._side_slot[row] = self._side_put(state.exact)
        if state.whole is not None:
            self._whole[memory_id] = state.whole
        if self._has[row]:
            self._n_embedded += 1
            if self._special[row]:
                self._n_special += 1

    def _remove(self, memory_id: str) -> None:
        """Drop ``memory_id`` (present) and tombstone its row (the store's own)."""
        raise NotImplementedError
