"""Compatibility path: see :mod:`emotional_memory.stores.memory.state`."""

from emotional_memory.stores.memory.state import InMemoryAffectiveStateStore

__all__ = ["InMemoryAffectiveStateStore"]
