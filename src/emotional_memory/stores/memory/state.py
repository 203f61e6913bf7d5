"""Affective-state store held in process memory (docs/behaviour.md §8)."""

from __future__ import annotations

import json
import threading
from types import TracebackType
from typing import Any

from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import check_path, snapshot_text


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
        self._lock = threading.Lock()
        self._snapshot: str | None = None
        self._children: dict[tuple[str, ...], InMemoryAffectiveStateStore] = {}

    def scoped(self, path: tuple[str, ...]) -> InMemoryAffectiveStateStore:
        """The state store of scope ``path`` (an engine view's): one child store per
        path, the same object every time, so a view made again restores its state.

        Args:
            path: the view's full scope path (``()``: this store).

        Returns:
            The child store.
        """
        path = check_path(path)
        if not path:
            return self
        with self._lock:
            child = self._children.get(path)
            if child is None:
                child = self._children[path] = InMemoryAffectiveStateStore()
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
            self._snapshot = text

    def load(self) -> AffectiveState | None:
        """The stored state.

        Returns:
            The restored :class:`AffectiveState` (history included), or None when
            nothing is stored.
        """
        stored = self.load_snapshot()
        return None if stored is None else AffectiveState.restore(stored)

    def load_snapshot(self) -> dict[str, Any] | None:
        """The stored snapshot dict.

        Returns:
            A new dict, or None when nothing is stored.
        """
        with self._lock:
            stored = self._snapshot
        if stored is None:
            return None
        data: dict[str, Any] = json.loads(stored)
        return data

    def clear(self) -> None:
        """Forget the stored snapshot."""
        with self._lock:
            self._snapshot = None

    def __repr__(self) -> str:
        """``InMemoryAffectiveStateStore(has_state=<bool>)``, as the original's."""
        return f"{type(self).__name__}(has_state={self._snapshot is not None})"

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
