"""Compatibility path: see :mod:`emotional_memory.stores.sqlite.state`."""

from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

__all__ = ["SQLiteAffectiveStateStore"]
