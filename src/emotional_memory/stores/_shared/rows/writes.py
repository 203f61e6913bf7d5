"""Writing rows: saving a memory into its row, its record, place and lexical entry."""

from __future__ import annotations

import numpy as np

from emotional_memory.interfaces import EmbeddingDimensionError
from emotional_memory.models import Memory
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.linking import embedding_vector as _embedding_vector
from emotional_memory.stores._shared.records import to_microseconds
from emotional_memory.stores._shared.rows.columns import NEVER_US
from emotional_memory.stores._shared.rows.objects import (
    copy_metadata,
    private_copy,
)
from emotional_memory.stores._shared.rows.precision import (
    from_bfloat16_bits,  # noqa: F401  (was defined here; tests import it from here)
    to_bfloat16_bits,  # noqa: F401  (same)
)
from emotional_memory.stores._shared.rows.undo import UndoLog, undo_entry

RECENT = 256
"""Memory objects kept after a save or a read (least recent dropped first)."""


# Memory objects kept after a save or a read (most recent first out last).
_RECENT = 256


class RowWrites(UndoLog):
    """Writes of :class:`~emotional_memory.stores._shared.rows.store.RowStore` (a mixin)."""

    _labels: _records.LabelTable  # emotion-label names, interned
    _scopes: list[tuple[str, ...]]  # scope id -> path
    _scope_index: dict[tuple[str, ...], int]  # path -> scope id

    # ------------------------------------------------------------------ records

    def _row_content(self, row: int) -> str:
        """The content of live ``row`` (compact or kept whole)."""
        content = self._content[row]
        if content is not None:
            return content
        mid = self._row_ids[row]
        assert mid is not None
        return self._whole[mid].content

    def _memory_at(self, row: int, keep: bool = False) -> Memory:
        """The memory of live ``row``: a recent or whole object, else rebuilt.

        Args:
            row: a live row.
            keep: remember a rebuilt memory among the recent ones.
        """
        mid = self._row_ids[row]
        assert mid is not None
        memory = self._recent.get(mid)  # a hit becomes the most recently used
        if memory is not None:
            return private_copy(memory)
        memory = self._whole.get(mid)
        if memory is not None:
            return private_copy(memory)
        if self._has[row]:
            embedding: list[float] | None = self._exact_row(row).tolist()
        else:
            embedding = [] if self._empty[row] else None
        memory = _records.decode_memory(
            mid,
            self._content[row],  # type: ignore[arg-type]
            embedding,
            self._tagf[row].tolist(),
            self._tagi[row].tolist(),
            self._links[row],
            copy_metadata(self._meta[row]),
            self._labels,
            *(self._place_of(row) if self._placed else ()),
        )
        if keep:
            self._remember(private_copy(memory))
        return memory

    def _remember(self, memory: Memory) -> None:
        self._recent[memory.id] = memory  # evicts the least recently used

    # ------------------------------------------------------------------- writes

    def _put(
        self, memory: Memory, vector: np.ndarray | None = None, *, remember: bool = True
    ) -> None:
        """Insert or replace ``memory``; validates before touching any state.

        Args:
            memory: the memory.
            vector: its embedding as a float64 vector, when the caller has already
                converted it (:func:`_embedding_vector`'s result; None: convert it).
            remember: keep a copy among the recent objects (False: the row is about
                to change, as a new memory's links do while a block is linked).
        """
        _records.check_times(memory)
        memory_id = memory.id
        row = self._row_of.get(memory_id)
        known = self._recent.get(memory_id) if row is not None else None
        # A tag-only update carries an equal embedding list (handed-out copies are
        # private, so compare values; equal lists are what ``_stores_vector`` accepts).
        same_vector = known is not None and (
            known.embedding is memory.embedding
            or (known.embedding is not None and known.embedding == memory.embedding)
        )
        # the store's own equal list, kept instead of a copy of the caller's
        own_embedding = known.embedding if same_vector and known is not None else None
        vec = None
        if not same_vector:
            vec = vector if vector is not None else _embedding_vector(memory)
        if vec is not None and self._dim is not None and vec.shape[0] != self._dim:
            raise EmbeddingDimensionError(
                f"embedding dimension mismatch: memory {memory.id!r} has "
                f"{vec.shape[0]}, the store holds dimension {self._dim}"
            )
        compact = _records.fits(memory)
        if row is not None and not same_vector:
            same_vector = self._stores_vector(row, memory, vec)
        if vec is not None and self._dim is None and not same_vector:
            self._set_dim(vec.shape[0])
        if row is None:
            self._ensure_capacity(self._size + 1)
            row = self._size
            self._size += 1
            self._row_ids.append(memory_id)
            self._content.append(None)
            self._meta.append(None)
            self._links.append(None)
            self._row_of[memory_id] = row
            self._valid[row] = True
            self._seq[row] = self._next_seq
            self._next_seq += 1
            if self._tx_depth:
                self._undo.append(undo_entry("insert", memory_id, row, None))
        elif same_vector:  # the embedding's arrays stay as they are
            if self._tx_depth:
                self._undo.append(undo_entry("tags", memory_id, row, self._tag_snapshot(row)))
        else:
            if self._tx_depth:
                self._undo.append(undo_entry("replace", memory_id, row, self._snapshot(row)))
            self._clear_embedding(row)
        lossless = True
        if not same_vector:
            lossless = self._write_row(row, vec, empty=memory.embedding == [])
        self._write_record(row, memory, compact, lossless, remember, own_embedding)
        self._write_place(row, memory)
        if self._lexical is not None:
            self._lexical.set(memory_id, memory.content)

    def _stores_vector(self, row: int, memory: Memory, vec: np.ndarray | None) -> bool:
        """Whether ``row`` already stores exactly ``memory``'s embedding."""
        if vec is None:
            return not self._has[row] and bool(self._empty[row]) == (memory.embedding == [])
        if not self._has[row] or vec.shape[0] != self._dim:
            return False
        return bool(np.array_equal(self._exact_row(row), vec))

    def _write_record(
        self, row: int, memory: Memory, compact: bool, lossless: bool, remember: bool = True,
        own_embedding: list[float] | None = None,
    ) -> None:
        """Write everything but the embedding of ``memory`` into ``row`` (a compact row's
        memory is kept among the recent objects when lossless and ``remember``).

        ``own_embedding``: the store's own list equal to ``memory.embedding`` (a
        tag-only update), remembered instead of a copy.
        """
        memory_id = memory.id
        self._whole.pop(memory_id, None)
        if not (compact and lossless and remember):
            self._recent.pop(memory_id, None)  # else replaced below
        tag = memory.tag
        if compact:
            floats, ints = _records.encode_tag(tag, self._labels)
            self._tagf[row] = floats
            self._tagi[row] = ints
            self._content[row] = memory.content
            self._meta[row] = copy_metadata(memory.metadata) or None
            self._links[row] = _records.pack_links(tag.resonance_links, self._intern)
            if lossless and remember:
                self._remember(private_copy(memory, own_embedding))
            return
        # Kept whole; only the kernel's columns are written.
        a, m, v = tag.core_affect, tag.mood_snapshot, tag.momentum
        self._tagf[row] = 0.0
        self._tagi[row] = 0
        self._affect[row] = (a.valence, a.arousal, a.dominance)
        self._mood[row] = (m.valence, m.arousal, m.dominance)
        self._velocity[row] = (v.d_valence, v.d_arousal, v.d_dominance)
        self._timestamp_us[row] = to_microseconds(tag.timestamp)
        self._consolidation[row] = tag.consolidation_strength
        self._retrieval_count[row] = float(tag.retrieval_count)
        self._content[row] = None
        self._meta[row] = None
        self._links[row] = None
        if not lossless:
            stored = self._exact_row(row).tolist() if self._has[row] else memory.embedding
            memory = memory.model_copy(update={"embedding": stored})
        self._whole[memory_id] = private_copy(memory)

    def _place_of(self, row: int) -> tuple[tuple[str, ...], int | None]:
        """The scope path and expiry (microseconds, None: never) of ``row``."""
        expires = int(self._expires_us[row])
        return self._scopes[self._scope_id[row]], None if expires == NEVER_US else expires

    def _write_place(self, row: int, memory: Memory) -> None:
        """Write ``memory``'s scope and expiry into ``row`` (and bump the version)."""
        self._version += 1
        scope = memory.scope
        expires = memory.expires_at
        if not self._placed:
            if not scope and expires is None:
                return  # the row holds the fill values already
            self._placed = True
        sid = self._scope_index.get(scope) if scope else 0
        if sid is None:
            sid = len(self._scopes)
            self._scopes.append(scope)
            self._scope_index[scope] = sid
        self._scope_id[row] = sid
        if expires is None:
            self._expires_us[row] = NEVER_US
        else:
            self._expires_us[row] = to_microseconds(expires)
            self._any_expiry = True

    def _intern(self, memory_id: str) -> str:
        """The store's own copy of a stored id (links then share it), else the id."""
        row = self._row_of.get(memory_id)
        if row is None:
            return memory_id
        own = self._row_ids[row]
        return own if own is not None else memory_id

    def _remove(self, memory_id: str) -> None:
        """Drop ``memory_id`` (present) and tombstone its row."""
        row = self._row_of[memory_id]
        if self._tx_depth:
            self._undo.append(undo_entry("delete", memory_id, row, self._snapshot(row)))
        self._clear_embedding(row)
        del self._row_of[memory_id]
        self._recent.pop(memory_id, None)
        self._whole.pop(memory_id, None)
        if self._lexical is not None:
            self._lexical.discard(memory_id)
        self._valid[row] = False
        self._version += 1
        self._row_ids[row] = None
        self._content[row] = None
        self._meta[row] = None
        self._links[row] = None
        self._dead += 1
        if self._n_embedded == 0:
            self._dim = None

    def _load_bulk(self, memories: list[Memory], matrix: np.ndarray | None) -> None:
        """Fill an empty store in one go (used when a durable store opens).

        Args:
            memories: the memories, in insertion order, with distinct ids.
            matrix: unused (each memory carries its embedding); kept for callers.
        """
        if self._row_of or self._size:
            raise RuntimeError("_load_bulk needs an empty store")
        del matrix
        self._ensure_capacity(len(memories))
        for memory in memories:
            self._put(memory)

