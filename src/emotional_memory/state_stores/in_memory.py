"""Affective-state store held in process memory (SPEC 8)."""

from __future__ import annotations

import copy
import threading
from types import TracebackType
from typing import Any


class InMemoryAffectiveStateStore:
    """An :class:`~emotional_memory.interfaces.AffectiveStateStore` in process memory.

    Snapshots are deep-copied on the way in and on the way out, so neither the caller
    nor later readers can change the stored state by mutating a dict.
    """

    def __init__(self) -> None:
        """Create an empty store."""
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] | None = None

    def save(self, snapshot: dict[str, Any]) -> None:
        """Store ``snapshot``, replacing any previous one.

        Args:
            snapshot: a dict such as :meth:`AffectiveState.snapshot` returns.

        Raises:
            TypeError: when ``snapshot`` is not a dict.
        """
        if not isinstance(snapshot, dict):
            raise TypeError(f"snapshot must be a dict, got {type(snapshot).__name__}")
        copied = copy.deepcopy(snapshot)
        with self._lock:
            self._snapshot = copied

    def load(self) -> dict[str, Any] | None:
        """The stored snapshot.

        Returns:
            A deep copy of the stored dict, or None when nothing is stored.
        """
        with self._lock:
            stored = self._snapshot
        return None if stored is None else copy.deepcopy(stored)

    def clear(self) -> None:
        """Forget the stored snapshot."""
        with self._lock:
            self._snapshot = None

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
