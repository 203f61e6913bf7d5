"""Affective-state store held in process memory (docs/behaviour.md §8)."""

from __future__ import annotations

import json
import threading
from types import TracebackType
from typing import Any

from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import (
    check_path,
    restore_stored,
    scoped_key,
    snapshot_text,
)


class InMemoryAffectiveStateStore:
    """An :class:`~emotional_memory.interfaces.AffectiveStateStore` in process memory.

    The state is kept as its snapshot's JSON text, as the durable stores keep it: a
    snapshot reads back as it does from them (integer keys as strings, tuples as
    lists), one they cannot store (NaN, a value JSON cannot hold) is refused here
    too, and neither the caller nor later readers can change the stored state by
    mutating a dict. ``save(state)`` / ``load() -> AffectiveState`` is the original
    library's protocol; :meth:`load_snapshot` reads the raw dict.
    """

    def __init__(self) -> None:
        """Create an empty store."""
        # every scope's snapshot JSON text, by path (``()``: the root's), shared by the
        # root store and all its scoped stores: only saved states take room, so a
        # scope that is only read leaves nothing behind
        self._lock = threading.Lock()
        self._table: dict[tuple[str, ...], str] = {}
        self._path: tuple[str, ...] = ()

    def scoped(self, path: tuple[str, ...]) -> InMemoryAffectiveStateStore:
        """The state store of scope ``path`` (an engine view's): a store over this
        one's table, so a view made again restores the state its path holds.

        Args:
            path: the view's full scope path (``()``: this store).

        Returns:
            The scope's store (this store for ``()``).
        """
        path = check_path(path)
        if not path:
            return self
        child = InMemoryAffectiveStateStore.__new__(InMemoryAffectiveStateStore)
        child._lock, child._table, child._path = self._lock, self._table, self._path + path
        return child

    def save(self, state: AffectiveState | dict[str, Any]) -> None:
        """Store ``state``, replacing any previous one.

        Args:
            state: an :class:`AffectiveState`, or a snapshot dict such as
                :meth:`AffectiveState.snapshot` returns.

        Raises:
            TypeError: when ``state`` is neither, or not JSON-serialisable.
            ValueError: when it holds NaN or infinite numbers.
        """
        text = snapshot_text(state)
        with self._lock:
            self._table[self._path] = text

    def load(self) -> AffectiveState | None:
        """The stored state.

        Returns:
            The restored :class:`AffectiveState` (history included), or None when
            nothing is stored.

        Raises:
            StoredStateError: a saved dict that is no state snapshot (named by
                ``"memory"`` and the scope path, as the durable stores name their key).
        """
        return restore_stored(scoped_key("memory", self._path), self.load_snapshot())

    def load_snapshot(self) -> dict[str, Any] | None:
        """The stored snapshot dict.

        Returns:
            A new dict, or None when nothing is stored.
        """
        with self._lock:
            stored = self._table.get(self._path)
        if stored is None:
            return None
        data: dict[str, Any] = json.loads(stored)
        return data

    def clear(self) -> None:
        """Forget the stored snapshot."""
        with self._lock:
            self._table.pop(self._path, None)

    def __repr__(self) -> str:
        """``InMemoryAffectiveStateStore(has_state=<bool>)``, as the original's."""
        return f"{type(self).__name__}(has_state={self._path in self._table})"

    def close(self) -> None:
        """Nothing to release (kept for interface parity with durable stores)."""

    def __enter__(self) -> InMemoryAffectiveStateStore:
        """Context-manager entry: the store itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Context-manager exit: :meth:`close`."""
        self.close()
